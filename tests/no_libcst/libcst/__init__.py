# An interpreter without libcst, simulated: put this folder first on PYTHONPATH (tests of "fixes are unavailable").
raise ImportError("No module named 'libcst' (simulated by tests/no_libcst)")
