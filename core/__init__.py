"""The shared kernel that models/ and decoding/ both import (and neither imports the other's):
errors, registries, the special token ids, option checking and output-length budgets."""
