"""The HTML animation player: one self-contained page that steps through PNG frames.

Frames are inlined as data URLs and the script is inline too, so the page opens offline, from a
file or as a notebook output, and loads nothing from the network.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json


def _script_literal(value) -> str:
    """``value`` as a JavaScript literal for a ``<script>`` element: JSON with ``</`` written ``<\\/``,
    so that no string in it (a caption quoting a label from the data) can end the element."""
    return json.dumps(value).replace("</", "<\\/")


def player_page(frames: list[bytes], captions: list[str], title: str, seconds_per_frame: float = 0.8) -> str:
    """A small HTML page that steps through PNG ``frames``: play/pause, previous, next and a
    slider. Everything is inline, so it works offline and as a notebook output."""
    uid = "gf" + hashlib.sha1(b"".join(frames)).hexdigest()[:10]  # ids stay unique in a notebook
    sources = [f"data:image/png;base64,{base64.b64encode(frame).decode('ascii')}" for frame in frames]
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
  #{uid} {{ font-family: sans-serif; }}
  #{uid} img {{ max-width: 100%; display: block; }}
  #{uid} button {{ font-size: 1em; min-width: 3em; }}
</style>
</head>
<body>
<div id="{uid}">
<img alt="attention map" src="{sources[0]}">
<div>
  <button data-step="-1" title="previous frame">&#9664;</button>
  <button data-play title="play or pause">play</button>
  <button data-step="1" title="next frame">&#9654;</button>
  <input type="range" min="0" max="{len(frames) - 1}" value="0" aria-label="frame">
  <span class="caption">{html.escape(captions[0])}</span>
</div>
</div>
<script>
(function () {{
  const frames = {_script_literal(sources)};
  const captions = {_script_literal(captions)};
  const root = document.getElementById("{uid}");
  const img = root.querySelector("img"), slider = root.querySelector("input"),
        caption = root.querySelector(".caption"), play = root.querySelector("[data-play]");
  let current = 0, timer = null;
  function show(i) {{
    current = (i + frames.length) % frames.length;
    img.src = frames[current]; slider.value = current; caption.textContent = captions[current];
  }}
  root.querySelectorAll("[data-step]").forEach(b => b.onclick = () => show(current + Number(b.dataset.step)));
  slider.oninput = () => show(Number(slider.value));
  play.onclick = () => {{
    if (timer) {{ clearInterval(timer); timer = null; play.textContent = "play"; return; }}
    timer = setInterval(() => show(current + 1), {int(1000 * seconds_per_frame)}); play.textContent = "pause";
  }};
}})();
</script>
</body>
</html>
"""
