"""Front-ends: one module per input type turns its input into counts on a structure.

* :mod:`hierdp.frontends.pandas` — ``.dptree`` on DataFrames and Series (registered on import).
* :mod:`hierdp.frontends.points` — coordinates in a public box: private spatial
  decompositions (PrivTree, SimpleTree, uniform grid) and range-count queries.
* :mod:`hierdp.frontends.counting` — placing records on a structure and counting them,
  shared by every front-end.
"""
