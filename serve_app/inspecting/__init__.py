"""Inspections (`vidforge_inspect_video`): what a video is and what its quality check finds, for an asset or a
finished video, without rendering it.
"""
