"""Worked examples the docs include verbatim (docs/writing_a_selector.md); their tests run them."""
