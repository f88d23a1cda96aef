"""Shop environments: WebShop, its catalogue (generated or the real data files) and its reward."""
