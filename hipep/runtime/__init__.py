"""Runtime: devices and the executor. Reads ops/ and plan; never imports the compiler."""
