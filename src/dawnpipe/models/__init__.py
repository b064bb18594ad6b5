"""Model zoos, one module per framework; import only the one you train with."""
