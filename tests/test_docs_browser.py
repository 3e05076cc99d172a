"""The documentation site in a browser: at 1280 and 1920 px, no table, code block or
signature of the pages a reader opens first is wider than its column, every page shows
the site's navigation, and the copy button drops prompts and output.

Headless Chromium lays the pages out; a script added to a copy of each page measures them
and writes its findings into the page, which ``--dump-dom`` returns. The site is the one
``tests/test_docs_site.py`` builds (or ``NBRMM_DOCS_HTML``). Without a browser (chromium,
chromium-browser or google-chrome on PATH, or Playwright's Chromium) the tests skip.
"""

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from helpers import browser_env
from test_docs_site import built_site

PAGES = ["index", "moving-from-rmm", "differences", "api/generated/nbrmm.Buffer"]
WIDTHS = [1280, 1920]

# Measures every table, code block and signature of the article: its right edge against
# the column's, and whether its content is wider than its box (or than the box that
# scrolls it), which a reader would not see. The copy button's own formatting function is
# applied to the first console example.
_CHECK = """
<script>
COPY_FUNCTIONS
window.addEventListener("load", () => {
  const article = document.querySelector(".bd-article");
  const column = article.getBoundingClientRect().right;
  const items = [];
  for (const el of article.querySelectorAll("table, pre, dt.sig")) {
    const box = el.closest(".pst-scrollable-table-container") || el;
    items.push({
      kind: el.tagName.toLowerCase(),
      text: el.textContent.trim().slice(0, 60),
      right: el.getBoundingClientRect().right,
      column: column,
      scrollWidth: box.scrollWidth,
      clientWidth: box.clientWidth,
      visible: el.getBoundingClientRect().width > 0,
    });
  }
  const nav = document.querySelectorAll(".bd-sidebar-primary .bd-docs-nav a.reference");
  const pycon = article.querySelector("div.highlight-pycon pre");
  const report = {
    items: items,
    nav_links: nav.length,
    copy_buttons: article.querySelectorAll("button.copybtn").length,
    code_blocks: article.querySelectorAll("div.highlight pre").length,
    pycon: pycon ? pycon.innerText : null,
    copied: null,
  };
  try {
    report.copied = pycon ? nbrmmFormatCopyText(pycon.innerText, COPY_ARGS) : null;
  } catch (error) {
    report.copied = `error: ${error}`;
  }
  const out = document.createElement("pre");
  out.id = "nbrmm-layout-report";
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
});
</script>
"""


@pytest.fixture(scope="module")
def site():
    return built_site()


def copy_arguments(site):
    """The arguments the site's copy button passes to its formatting function (the
    configured prompts and options)."""
    m = re.search(r"return formatCopyText\(text, (.*)\)\s*$",
                  (site / "_static" / "copybutton.js").read_text(), re.M)
    assert m, "copybutton.js: the copy button's formatting call was not found"
    return m[1]


def copy_functions(site):
    """The copy button's own functions that format what it copies, renamed (in the page
    they are not reachable from another script)."""
    source = (site / "_static" / "copybutton.js").read_text()
    functions = [
        re.search(rf"^function {name}\(.*?^}}$", source, re.M | re.S)
        for name in ("escapeRegExp", "formatCopyText")
    ]
    assert all(functions), "copybutton.js: its formatting functions were not found"
    return "\n".join(f[0] for f in functions).replace(
        "function formatCopyText(", "function nbrmmFormatCopyText(")


def layout(browser, site, page, width):
    """The report of ``_CHECK`` for ``page`` at ``width`` px."""
    source = site / f"{page}.html"
    script = _CHECK.replace("COPY_FUNCTIONS", copy_functions(site)).replace(
        "COPY_ARGS", copy_arguments(site))
    # Beside the page, so that its relative links (styles, scripts) resolve.
    checked = source.with_name(f"{source.stem}.layout-check.html")
    checked.write_text(source.read_text().replace("</body>", script + "</body>"))
    try:
        with tempfile.TemporaryDirectory() as profile:
            result = subprocess.run(
                [browser, "--headless=new", "--no-sandbox", "--disable-gpu",
                 f"--user-data-dir={profile}", f"--window-size={width},900",
                 "--virtual-time-budget=10000", "--dump-dom", checked.as_uri()],
                capture_output=True, text=True, timeout=120, check=False, env=browser_env(),
            )
    finally:
        checked.unlink()
    m = re.search(r'<pre id="nbrmm-layout-report"[^>]*>(.*?)</pre>', result.stdout, re.S)
    assert m, f"{page}: no layout report (browser exit {result.returncode}): {result.stderr[-2000:]}"
    return json.loads(m[1].replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
                      .replace("&amp;", "&"))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("page", PAGES)
def test_nothing_is_wider_than_its_column(browser, site, page, width):
    report = layout(browser, site, page, width)
    items = [item for item in report["items"] if item["visible"]]
    if page != "index":  # the index has prose and lists only
        assert items, f"{page}: no table, code block or signature was measured"
    cut = [
        item for item in items
        if item["right"] > item["column"] + 1 or item["scrollWidth"] > item["clientWidth"] + 1
    ]
    assert not cut, f"{page} at {width} px: wider than the column: " + "; ".join(
        f"{item['kind']} {item['text']!r} (content {item['scrollWidth']} px in "
        f"{item['clientWidth']} px, right edge {item['right']:.0f} of {item['column']:.0f})"
        for item in cut
    )
    if page in ("moving-from-rmm", "differences"):
        assert any(item["kind"] == "table" for item in items), f"{page}: no table measured"


@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_the_site_navigation(browser, site, page):
    report = layout(browser, site, page, 1280)
    # Every guide page and the API reference are in it.
    assert report["nav_links"] >= 15, f"{page}: {report['nav_links']} links in the left column"
    assert report["copy_buttons"] == report["code_blocks"], (
        f"{page}: {report['code_blocks']} code blocks but {report['copy_buttons']} copy buttons"
    )


def test_the_copy_button_drops_prompts_and_output(browser, site):
    report = layout(browser, site, "moving-from-rmm", 1280)
    shown, copied = report["pycon"], report["copied"]
    assert shown is not None, "moving-from-rmm has no console example"
    expected = [line[4:] for line in shown.splitlines() if line.startswith((">>> ", "... "))]
    assert expected, shown
    assert copied.splitlines() == expected
