"""hierdp's private kernels: compiled kernels and how they run.

Nothing here is public API. The modules sit below every other layer of the package (they
import numpy, numba and each other, never the tree, mechanisms, plans or front-ends):

* ``jit`` -- numba's set-up (cache folder, the first-compile notice, interpreted small inputs);
* ``threads`` -- the thread count and the pool that runs pieces of a pass;
* ``memory`` -- large, aligned and narrow arrays;
* ``kernel_common`` -- kernels every other kernel module inlines;
* ``tree_kernels`` -- aggregation and tree-order kernels;
* ``tree_pieces`` -- how a tree's height classes are cut into pieces for threads;
* ``gm_passes`` -- the Generation Matrix passes (Yang et al., the GM paper).
"""
