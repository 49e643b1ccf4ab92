"""Quality control of a render and of an existing video: black and frozen picture, silence, clipping, loudness,
the encode's fidelity to its source, and a contact sheet.

Each segment task measures the frames it already holds (`segment_checks`, into a small `SegmentQc`), the audio
task the whole track (`audio_checks`, an `AudioQc`); `merge.merge_qc` stitches them into one `QcReport`, and
`sheet.contact_sheet` draws the tiles they carry. `inspect.inspect_video` runs the same detectors over a whole
existing file. Pure PyAV, numpy and Pillow, like the rest of render_kernels.
"""
