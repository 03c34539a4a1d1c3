// The map's boxes open their card through one listener on the map's container, which is never
// swapped. The map itself is swapped every 2 s; a listener on each box would be attached only once
// htmx has processed the new box, and a click landing before that (a slow or busy browser) would
// do nothing.
document.addEventListener("DOMContentLoaded", () => {
  const map = document.getElementById("system-map");
  if (!map) return;
  const open = (event) => {
    const box = event.target.closest("[data-process]");
    if (!box || !map.contains(box)) return;
    if (event.type === "keyup" && event.key !== "Enter") return;
    htmx.ajax("GET", "/fragments/act/" + encodeURIComponent(box.dataset.process), "#act");
  };
  map.addEventListener("click", open);
  map.addEventListener("keyup", open);
});
