// Draws each canvas of a session page with Mermaid, then makes every drawn node a link to its drill-down page.
// The Mermaid text is read as textContent (the page escaped it; nothing is decoded twice) and rendered with
// securityLevel "strict" (labels sanitised, no click callbacks from the diagram text). The body's
// data-canvases ends as "rendered" or "failed", so a test or a person can tell.
(async () => {
  const articles = [...document.querySelectorAll("article.canvas")];
  if (!window.mermaid || articles.length === 0) return;
  mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "neutral",
                      fontFamily: getComputedStyle(document.body).fontFamily,  // the page's, Chinese faces included
                      flowchart: { wrappingWidth: 420 } });  // canvas labels carry a summary line
  let failed = false;
  for (const [i, article] of articles.entries()) {
    const source = article.querySelector("pre.mermaid");
    try {
      const { svg } = await mermaid.render(`canvas-${i}`, source.textContent);
      const drawing = document.createElement("div");
      drawing.className = "drawing";
      drawing.innerHTML = svg;
      source.replaceWith(drawing);
    } catch (err) {
      failed = true;
      article.dataset.error = String(err);
      continue;
    }
    const base = article.dataset.nodes;
    const known = new Set([...article.querySelectorAll("a.node")].map((a) => a.dataset.node));
    const prefix = `canvas-${i}-flowchart-`;  // Mermaid's element id: <svg id>-flowchart-<node id>-<counter>
    for (const g of article.querySelectorAll("svg g.node")) {
      const id = g.id.startsWith(prefix) ? g.id.slice(prefix.length).replace(/-\d+$/, "") : "";
      if (!known.has(id)) continue;
      g.dataset.node = id;
      const go = () => { window.location.href = base + encodeURIComponent(id); };
      g.classList.add("drill");
      g.setAttribute("role", "link");
      g.setAttribute("tabindex", "0");
      g.addEventListener("click", go);
      g.addEventListener("keydown", (e) => { if (e.key === "Enter") go(); });
    }
  }
  document.body.dataset.canvases = failed ? "failed" : "rendered";
})();
