"""Optional integrations with other training engines (veRL). Never imported by the layers below."""
