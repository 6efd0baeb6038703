"""Files installed into every lab node image (scripts for the udev stand-in and boot)."""
