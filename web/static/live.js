// Live updates: each element with data-live="URL" is refreshed from that URL (a fragment of the
// same page) every data-every seconds, while the tab is visible. Without JavaScript the pages
// still work; they are then as fresh as their last load.
"use strict";
document.querySelectorAll("[data-live]").forEach((region) => {
  const every = Math.max(1, Number(region.dataset.every || 5)) * 1000;
  const refresh = async () => {
    if (document.hidden || region.contains(document.activeElement)) return;
    try {
      const response = await fetch(region.dataset.live, { credentials: "same-origin" });
      if (response.redirected) {
        window.location.reload();  // the session ended: the page itself goes to sign-in
      } else if (response.ok) {
        const html = await response.text();
        if (html !== region.dataset.shown) {  // replace only what changed, so focus and readers rest
          region.innerHTML = html;
          region.dataset.shown = html;
        }
      }
    } catch (error) {
      // The registry is away for a moment: keep what is shown and try again next time.
    }
  };
  setInterval(refresh, every);
});
