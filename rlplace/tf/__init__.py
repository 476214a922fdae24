"""TensorFlow side of rlplace: graph extraction, profiling, measurement (the TensorFlow issue)."""
