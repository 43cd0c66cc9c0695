// The little JavaScript of the page: refresh what changes, nothing else.
// - an element with data-refresh="URL" data-every="MS" gets URL's HTML every MS milliseconds (the jobs list);
// - a <main data-job="ID" data-finished="false"> follows the job's server-sent events and, on each,
//   swaps #live for the server's fresh rendering of it; it stops at the job's end.
"use strict";

async function fetchHtml(url) {
  const response = await fetch(url, {credentials: "same-origin", headers: {"Accept": "text/html"}});
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.text();
}

function refreshEvery(element) {
  const every = Number(element.dataset.every || 2000);
  const tick = async () => {
    try {
      element.innerHTML = await fetchHtml(element.dataset.refresh);
    } catch (error) {
      console.warn("refresh failed", error.message);
    }
    setTimeout(tick, every);
  };
  setTimeout(tick, every);
}

function followJob(main) {
  const id = main.dataset.job;
  let pending = null;
  const redraw = () => {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      try {
        const open = new Set([...document.querySelectorAll("#live details[open]")].map((d) => d.closest("section")?.id));
        const html = await fetchHtml(`/jobs/${encodeURIComponent(id)}?partial=main`);
        const fresh = new DOMParser().parseFromString(html, "text/html").querySelector("#live");
        if (fresh) {
          document.querySelector("#live").replaceWith(fresh);
          open.forEach((section) => section && document.querySelectorAll(`#${CSS.escape(section)} details`).forEach((d) => { d.open = true; }));
        }
      } catch (error) {
        console.warn("redraw failed", error.message);
      }
    }, 300);
  };
  const source = new EventSource(`/v1/jobs/${encodeURIComponent(id)}/events`);
  for (const type of ["status", "step", "verdict", "episode", "episode_started", "episode_retried", "run_started", "batch_started"]) {
    source.addEventListener(type, redraw);
  }
  source.addEventListener("end", () => { source.close(); redraw(); });
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-refresh]").forEach(refreshEvery);
  const main = document.querySelector("main[data-job]");
  if (main && main.dataset.finished === "false") followJob(main);
});
