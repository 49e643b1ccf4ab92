"""The watch page: where the person an agent renders for plays the finished video in a browser (contract §3.4 names
the video as a `resource_link`, which a chat host cannot play; this page can).

`GET /watch/<task id>?cap=…` plays the video in an HTML `<video>` (Range requests, so it starts at once and seeks),
shows its poster frame until it plays and the facts (size, duration, format, resolution, until when it is kept),
what its quality check found (the verdict, its reasons and the contact sheet; serve_app/ingress/review/quality.py),
and offers a download button. The video, the download, the poster and the contact sheet are fetched through the
same capability; with the media in a bucket and direct transfers on, the video and the download are redirects to
short-lived presigned URLs of the object (serve_app/ingress/_http_files.py), so the bytes do not pass through the
server.

The credential is the link itself: the review page's capability scheme (serve_app/ingress/review/capability.py),
under the same key with a purpose of its own (a review link opens no watch page, and the other way round), scoped to
one task and valid for as long as its result is kept (VIDFORGE_RESULT_RETENTION_S from the moment it finished).
No bearer token is asked for and no cookie is set. The page carries the review page's browser hardening
(serve_app/ingress/review/pages.py), its Content-Security-Policy allowing media from this server (and the bucket's
endpoint, when the video comes from there).

- `links`: the watch URL of a finished render, as the wire hands it to people (the result's text and its
  `resource_link`'s description, the status tool's message);
- `view`: what the page says about the video;
- `routes`: the Starlette endpoints over a `WatchBackend`.
"""
