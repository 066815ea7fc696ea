"""Front-ends ("doors"): one module per input type turns its input into counts on a structure.

* :mod:`hierdp.frontends.base` — the front door: the release keywords every door shares,
  their checks, the one release path, and :func:`~hierdp.frontends.base.dptree`, which
  dispatches on the input type (:func:`~hierdp.frontends.base.register_door`).
* :mod:`hierdp.frontends.tree_door` — :class:`~hierdp.frontends.tree_door.TreeDoor`, the
  base of the doors on a declared tree.
* :mod:`hierdp.frontends.pandas` — ``.dptree`` on DataFrames and Series (registered on import).
* :mod:`hierdp.frontends.xarray` — ``.dptree`` on DataArrays and Datasets.
* :mod:`hierdp.frontends.dask` — ``.dptree`` on Dask DataFrames.
* :mod:`hierdp.frontends.polars` — ``.dptree`` on Polars DataFrames and LazyFrames, counted
  in Polars' engine (registered when polars is imported).
* :mod:`hierdp.frontends.spark` — ``hierdp.dptree(spark_df, ...)`` on Spark DataFrames
  (checks, bounding and counting on the executors; subtree tasks on Spark).
* :mod:`hierdp.frontends.dataset` — ``hierdp.dptree("records/", ...)`` on Parquet/CSV files,
  counted out of core in DuckDB.
* :mod:`hierdp.frontends.points` — coordinates in a public box: private spatial
  decompositions (PrivTree, SimpleTree, uniform grid) and range-count queries.
* :mod:`hierdp.frontends.sequences` — private prediction suffix trees over sequences.
* :mod:`hierdp.frontends.taxonomy` — PrivTree on a public taxonomy, and on mixed
  numeric × categorical attributes.
* :mod:`hierdp.frontends.counting` — placing records on a structure and counting them,
  shared by every front-end.
"""
