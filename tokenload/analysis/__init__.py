"""Analysis of a run: which resource saturated at each step, with the evidence. Pure."""
