"""Hardware backends (pyserial, OpenCV) and device emulators that speak the same bytes."""
