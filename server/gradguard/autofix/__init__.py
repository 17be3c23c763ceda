"""Building and applying fixes: ``build.Fixer`` asks each finding's rule for its fix (once, on demand), ``plan``
is the one planner every client shares (which fixes, in which order, until none is left) and ``writer`` writes
files and notebook cells (``gradguard check --fix / --diff``, and the cell plans the language server's notebook
"Fix all" uses).  The fixes themselves are built by each rule with the edit toolkit in ``gradguard.fixes``; this
layer only asks for them, chooses among them, applies them and writes the result."""
