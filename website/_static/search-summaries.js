/* The search page's summaries: cut from the article alone (not from the page's buttons, printed
   contents and footer, which Sphinx's summaries otherwise start with), with their math typeset by
   the site's MathJax, and a formula cut in two by the summary's ends dropped rather than shown as
   TeX. Runs before Sphinx's search (its DOMContentLoaded listener comes first). */
document.addEventListener("DOMContentLoaded", () => {
  const results = document.getElementById("search-results");
  if (!results || typeof Search === "undefined" || !Search.htmlToText) return;
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    page.querySelectorAll(".bd-header-article, .onlyprint, .bd-sidebar-secondary, "
                          + ".bd-footer-article, .prev-next-area, footer")
      .forEach((node) => node.remove());
    return htmlToText(page.documentElement.outerHTML, anchor);
  };

  // Remove the characters [start, end) of an element's text, across its text nodes.
  const cut = (element, start, end) => {
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    let offset = 0;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const length = node.data.length;
      const from = Math.max(start - offset, 0), to = Math.min(end - offset, length);
      if (from < to) node.data = node.data.slice(0, from) + node.data.slice(to);
      offset += length;
    }
  };
  const mendMath = (summary) => {
    let text = summary.textContent;
    const close = text.search(/\\[)\]]/), open = text.search(/\\[(\[]/);
    if (close >= 0 && (open < 0 || close < open)) cut(summary, 0, close + 2);
    text = summary.textContent;
    const lastOpen = Math.max(text.lastIndexOf("\\("), text.lastIndexOf("\\["));
    const lastClose = Math.max(text.lastIndexOf("\\)"), text.lastIndexOf("\\]"));
    if (lastOpen > lastClose) cut(summary, lastOpen, text.length);
  };

  new MutationObserver(() => {
    const fresh = [...results.querySelectorAll("p.context:not(.mathjax_process)")];
    if (!fresh.length) return;
    fresh.forEach((summary) => {
      summary.classList.add("mathjax_process");
      mendMath(summary);
    });
    if (window.MathJax && MathJax.startup) {
      MathJax.startup.promise.then(() => MathJax.typesetPromise(fresh));
    }
  }).observe(results, {childList: true, subtree: true});
});
