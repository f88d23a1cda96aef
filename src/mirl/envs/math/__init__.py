"""Math environments: Countdown (scored by a whitelisted arithmetic evaluator) and MetaMathQA."""
