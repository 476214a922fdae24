"""Bring your own model: import a training step from outside rlplace as an OpGraph.

One module per route, each importing its framework only when used:

* ``rlplace.import_.keras``: a Keras model (or a function building a loss) as a TensorFlow
  training step (``TFModel``) and its OpGraph, which ``backend=tf`` can measure;
* ``rlplace.import_.torch``: a PyTorch module's training step traced to aten ops;
* ``rlplace.import_.fiddle``: the profiled-graph JSON of msr-fiddle/dnn-partitioning
  (Tarnawski et al., NeurIPS'20) as an OpGraph and a Cluster.
"""
