"""Optional integrations with other training engines (veRL, TRL). Never imported by the layers below."""
