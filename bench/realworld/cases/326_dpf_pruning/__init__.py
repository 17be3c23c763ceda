# Package for case 326 (see main.py for the source thread).
