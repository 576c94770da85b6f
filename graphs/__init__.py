"""Graphs and the public engine of workmem."""
