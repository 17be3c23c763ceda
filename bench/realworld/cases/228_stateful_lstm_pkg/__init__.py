# Package for case 228 (see main.py for the thread and diagnosis).
