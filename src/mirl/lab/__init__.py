"""The model organism: a tiny policy built to show template collapse on ``keysum`` (docs/organism.md)."""
