"""Reports of runs: the document and its charts."""
