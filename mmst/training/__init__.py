"""mmst: multilingual simultaneous speech translation."""
