"""Stand-in of Megatron-core (the parts fp8audit.te routes); see core/tensor_parallel/random.py."""
