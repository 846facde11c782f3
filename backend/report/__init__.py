"""Reports of runs: the blocks, the document built from the history, its charts, cells and renderers."""
