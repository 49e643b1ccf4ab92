"""The watermark review page: where the person in the loop sees the preview and decides (contract §3.3: "the preview
is exposed as a readable resource so any client (and the human) can look at it before deciding").

`GET /review/<task id>?cap=…` shows the preview frame at the output resolution beside the source's first frame, the
watermark's position and opacity, the render's format and resolution, and the time left; its Approve and Reject
buttons POST the decision through the same registry transition as `tasks/update` and `vidforge_approve_watermark`.
Once the approved render has finished, the page says so, links its watch page and shows what its quality check found
(the verdict, its reasons and the contact sheet).

The credential is the link itself: a capability signed by the server's review key (`capability`), scoped to one
task's one approval round and expiring, minted into every place the preview is named (`links`). No bearer token is
asked for and no cookie is set, so there is no ambient credential for another site to ride on.

- `capability`: minting and checking the signed capability (HMAC-SHA256), and the refusals (403/410);
- `links`: the review URL of a record awaiting approval, as the wire hands it to people;
- `pages`: the Jinja2 templates and the headers every review response carries (CSP, no framing, no referrer,
  no caching);
- `view`: what the page says about a render (the facts in words, the time left, where the decision stands);
- `quality`: a finished video's quality check as this page and the watch page show it;
- `routes`: the Starlette endpoints over a `ReviewBackend`.
"""
