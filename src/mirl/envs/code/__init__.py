"""Code environments: DeepCoder, its problem sets and templates, and the sandbox that runs the model's programs."""
