"""Small shared pieces: bounded file reads, units, printable text, user config, crash log, signals,
CLI parsing, the heap left to the OS at exit."""
