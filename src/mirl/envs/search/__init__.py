"""Search environments: SearchQA over a generated knowledge base, and the retrievers (BM25, HTTP) it searches with."""
