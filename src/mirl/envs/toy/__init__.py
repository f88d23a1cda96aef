"""Toy environments for checking the machinery: the two-armed Bandit."""
