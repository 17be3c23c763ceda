"""Applying fixes: the one planner every client shares (``plan``: which fixes, in which order, until none is
left) and the writer of files and notebook cells (``writer``: ``gradguard check --fix / --diff``, and the cell plans
the language server's notebook "Fix all" uses).  The fixes themselves are built by each rule with the edit toolkit
in ``gradguard.fixes``; this layer only chooses among them, applies them and writes the result."""
