"""Media in requests: untrusted bytes decoded, checked and bounded before any of them reaches mtmd.

mtmd reads images with stb and audio with miniaudio, and several of its failures abort the process
(a 1x20000 image, 10 samples of audio): here images are decoded by Pillow and audio by libsndfile, and
only pixels and samples inside the limits mtmd is known to handle are passed on.

``sources`` turns a part's URL or inline data into bytes (fetching remote ones under limits), ``decode``
turns bytes into pixels or samples, ``video`` turns a video into frames and the text between them (with ffmpeg,
as llama-server does).
"""
