"""Device profiles: rules that depend on the device and its libraries (pure Python, no torch)."""
