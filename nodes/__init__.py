"""Nodes of the commit graph, the guards and merge, and the models they call."""
