"""Search strategies. They drive a model through a narrow protocol and never touch parameters."""
