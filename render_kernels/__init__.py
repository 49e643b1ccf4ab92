"""vidforge render kernels: pure PyAV/numpy functions that Ray tasks call (no Ray, no HTTP here).

probe (+ render_preview for the approval gate: read_source) -> plan_segments -> encode_segment x N (parallel)
+ encode_audio -> mux_segments. Everything passed between steps is a plain picklable value; raw frames never
leave the function that decoded them.
"""
