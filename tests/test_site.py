"""The documentation site, built on this machine and read in a real browser.

The site is built once per module, the way ``nox -s docs`` builds it (``sphinx-build -W
--keep-going``, every gallery example executed, here on the CPU unless there is a GPU), from
a copy of ``docs/`` and ``examples/`` so the checkout's own build is left alone. It is served
on 127.0.0.1 and driven with Debian's Chromium through Playwright; nothing is downloaded and
nothing outside 127.0.0.1 is reached: ui.perfetto.dev is answered by a stub inside the test.

The browser is the first of ``chromium`` (Debian's), ``chromium-browser`` and
``google-chrome`` found on ``PATH``; without one the browser tests fail with one line that says
how to install it. Set ``PROFILING_UTILS_SKIP_BROWSER=1`` to skip them instead.
"""

from __future__ import annotations

import functools
import gzip
import http.server
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
SKIP_BROWSER = "PROFILING_UTILS_SKIP_BROWSER"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SECTIONS = ("part1_matmul_add", "part2_linear_and_mlp", "part3_attention")
EXAMPLE_PAGE = r"auto_examples/[^/]+/plot_[^/]+\.html$"  # a gallery page, in its section
PERFETTO = "https://ui.perfetto.dev"
# Stands in for the Perfetto UI: answers PING with PONG and keeps what it was sent.
PERFETTO_STUB = """<!doctype html><title>Perfetto stub</title><script>
window.pings = 0;
window.addEventListener("message", (event) => {
  if (event.data === "PING") { window.pings += 1; event.source.postMessage("PONG", "*"); return; }
  const trace = event.data && event.data.perfetto;
  if (trace) {
    window.received = {byteLength: trace.buffer.byteLength, title: trace.title,
                       fileName: trace.fileName, origin: event.origin,
                       gzip: new Uint8Array(trace.buffer, 0, 2).join(",")};
  }
});
</script>"""


@dataclass
class Build:
    docs: Path
    html: Path
    returncode: int
    log: str
    seconds: float

    def executed(self) -> tuple[int, int]:
        """(examples executed, examples skipped as up to date) from sphinx-gallery's summary."""
        ran = re.search(r"successfully executed (\d+) out of (\d+)", self.log)
        skipped = re.search(r"after excluding (\d+) files? that had previously been run", self.log)
        assert ran and skipped, self.log[-3000:]
        return int(ran.group(1)), int(skipped.group(1))


def build_site(
    work: Path, examples: dict[str, str] | None = None, *, warnings_are_errors: bool = True
) -> Build:
    """Build the site like ``nox -s docs`` into ``work/html``, from a copy of the sources.

    ``examples`` replaces the gallery (file name -> source); by default the real one is used.
    Such a gallery cannot hold the pages that prose (the cheatsheet) links to, so those builds
    pass ``warnings_are_errors=False``. A second call with the same ``work`` builds
    incrementally, as a second ``nox -s docs`` does.
    """
    if not (work / "docs").exists():
        shutil.copytree(
            ROOT / "docs",
            work / "docs",
            ignore=shutil.ignore_patterns("_build", "auto_examples", "_generated", "__pycache__"),
        )
        if examples is None:
            shutil.copytree(
                ROOT / "examples",
                work / "examples",
                ignore=shutil.ignore_patterns("traces", "__pycache__"),
            )
        else:
            (work / "examples").mkdir()
            shutil.copy(ROOT / "examples" / "GALLERY_HEADER.rst", work / "examples")
            for name, source in examples.items():
                (work / "examples" / name).write_text(source)
    started = time.perf_counter()
    strict = ["-W", "--keep-going"] if warnings_are_errors else []
    command = [sys.executable, "-m", "sphinx", *strict, "-b", "html"]
    result = subprocess.run(
        [*command, str(work / "docs"), str(work / "html")],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    return Build(
        docs=work / "docs",
        html=work / "html",
        returncode=result.returncode,
        log=result.stdout + result.stderr,
        seconds=time.perf_counter() - started,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Build:
    build = build_site(tmp_path_factory.mktemp("site"))
    assert build.returncode == 0, build.log[-6000:]
    print(f"\nsite built in {build.seconds:.1f} s")
    return build


@pytest.fixture(scope="module")
def base_url(site: Build) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site.html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def find_browser() -> str:
    """The first of :data:`BROWSERS` on ``PATH``; fails the test, in one line, when none is."""
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    pytest.fail(
        f"no Chromium on PATH ({', '.join(BROWSERS)}): install it (Debian and Ubuntu: "
        f"sudo apt-get install chromium), or set {SKIP_BROWSER}=1 to skip the browser tests",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if os.environ.get(SKIP_BROWSER) == "1":
        pytest.skip(f"{SKIP_BROWSER}=1")
    executable = find_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A fresh browser profile; any request that leaves 127.0.0.1 fails the test."""
    context = browser.new_context(color_scheme="light")
    foreign: list[str] = []

    def perfetto_stub(route: Any) -> None:
        route.fulfill(status=200, content_type="text/html", body=PERFETTO_STUB)

    context.route(lambda url: url.startswith(PERFETTO), perfetto_stub)
    context.on(
        "request",
        lambda request: (
            None
            if request.url.startswith(("http://127.0.0.1:", PERFETTO, "data:", "blob:", "about:"))
            else foreign.append(request.url)
        ),
    )
    yield context
    context.close()
    assert foreign == [], f"requests to other sites: {foreign}"


def site_pages(site: Build) -> list[str]:
    return sorted(
        path.relative_to(site.html).as_posix()
        for path in site.html.rglob("*.html")
        if "_static" not in path.parts
    )


def pages_with_traces(site: Build) -> list[str]:
    return [p for p in site_pages(site) if 'class="pu-trace"' in (site.html / p).read_text()]


def test_site_has_every_section_and_the_gallery(site: Build) -> None:
    pages = site_pages(site)
    for page in (
        "index.html",
        "search.html",
        "auto_examples/index.html",
        *(f"auto_examples/{section}/index.html" for section in SECTIONS),
        "auto_examples/part1_matmul_add/plot_00_quickstart.html",
        "howto/profile-your-code.html",
        "howto/open-in-perfetto.html",
        "howto/diagnose-with-cli.html",
        "howto/rebuild-docs.html",
        "reference/cheatsheet.html",
        "reference/api.html",
        "reference/cli.html",
        "explanation/overhead-and-compute-bound.html",
        "explanation/dispatch-chain.html",
        "explanation/profiler-cost.html",
    ):
        assert page in pages
    # The gallery's index shows one section per part of the series, in the series' order.
    index = (site.html / "auto_examples" / "index.html").read_text()
    headings = re.findall(r"<h2>(Part \d)\b", index)
    assert headings == ["Part 1", "Part 2", "Part 3"], headings
    import torch

    if not torch.cuda.is_available():  # the gallery's index and a section's say so
        for shown in (index, (site.html / "auto_examples/part1_matmul_add/index.html").read_text()):
            assert "This build had no GPU" in shown
    api = (site.html / "reference" / "api.html").read_text()
    assert 'id="profiling_utils.capture.capture"' in api
    assert 'id="profiling_utils.render.html.profiler_table"' in api
    # An attribute's or a constant's docstring is shown as written, not split into a type.
    for documented in ("measures.Launch.call", "trace.TraceContent"):
        text = api.split(f'id="profiling_utils.{documented}"', 1)[1].split("</dd>", 1)[0]
        assert ">Type<" not in text, text
    assert "The call:" in api.split('id="profiling_utils.measures.Launch.call"', 1)[1][:600]


def test_every_page_loads_without_console_errors_and_every_image_loads(
    site: Build, base_url: str, context: Any
) -> None:
    problems: list[str] = []
    page = context.new_page()
    page.on("console", lambda m: problems.append(f"console: {m.text}") if m.type == "error" else 0)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "response",
        lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
    )
    images = 0
    for path in site_pages(site):
        page.goto(base_url + path, wait_until="load")
        broken = page.evaluate(
            """async () => {
                const images = [...document.images];
                await Promise.all(images.map((i) => i.decode().catch(() => null)));
                return [images.length,
                        images.filter((i) => !(i.complete && i.naturalWidth > 0))
                              .map((i) => i.currentSrc || i.src)];
            }"""
        )
        images += broken[0]
        problems += [f"{path}: image not loaded: {src}" for src in broken[1]]
    assert problems == []
    assert images > 0  # the gallery's thumbnails at least


def test_every_trace_download_answers_200_with_a_gzipped_trace(
    site: Build, base_url: str, context: Any
) -> None:
    page = context.new_page()
    hrefs = []
    for path in pages_with_traces(site):
        page.goto(base_url + path)
        links = page.locator(".pu-trace a.pu-trace-download")
        hrefs += links.evaluate_all("anchors => anchors.map(a => a.href)")
    assert len(hrefs) >= 1
    for href in hrefs:
        with urllib.request.urlopen(href) as response:
            assert response.status == 200
            body = response.read()
        assert body[:2] == b"\x1f\x8b", href
        assert "traceEvents" in json.loads(gzip.decompress(body))


def test_open_in_perfetto_hands_over_the_whole_trace(
    site: Build, base_url: str, context: Any
) -> None:
    page = context.new_page()
    page.goto(base_url + pages_with_traces(site)[0])
    widget = page.locator(".pu-trace").first
    button = widget.locator("button.pu-perfetto-open")
    assert button.is_visible()
    href = widget.locator("a.pu-trace-download").evaluate("a => a.href")
    with urllib.request.urlopen(href) as response:
        trace_bytes = response.read()

    with context.expect_page() as opened:
        button.click()
    perfetto = opened.value
    perfetto.wait_for_function("() => window.received !== undefined", timeout=15_000)
    received = perfetto.evaluate("window.received")

    assert perfetto.url.startswith(PERFETTO)
    assert received["byteLength"] == len(trace_bytes)
    assert received["gzip"] == "31,139"
    assert received["fileName"] == href.rsplit("/", 1)[1]
    assert received["title"] == widget.get_attribute("data-trace-title")
    assert perfetto.evaluate("window.pings") >= 1
    assert "Opened in Perfetto" in widget.locator(".pu-perfetto-status").inner_text()


def test_a_blocked_popup_says_what_to_do_instead(site: Build, base_url: str, context: Any) -> None:
    page = context.new_page()
    page.add_init_script("window.open = () => null")
    page.goto(base_url + pages_with_traces(site)[0])
    widget = page.locator(".pu-trace").first
    widget.locator("button.pu-perfetto-open").click()
    status = widget.locator(".pu-perfetto-status")
    assert "blocked" in status.inner_text()
    assert status.locator("a").get_attribute("href") == widget.get_attribute("data-trace-href")


def _luminance(css_color: str) -> float:
    red, green, blue = (int(v) for v in re.findall(r"\d+", css_color)[:3])
    return (0.2126 * red + 0.7152 * green + 0.0722 * blue) / 255


def test_the_theme_toggle_switches_between_light_and_dark(base_url: str, context: Any) -> None:
    page = context.new_page()
    page.goto(base_url + "index.html")
    seen = {}
    for _ in range(3):
        page.locator(".theme-toggle:visible").first.click()
        theme = page.evaluate("document.body.dataset.theme")
        seen[theme] = _luminance(page.evaluate("getComputedStyle(document.body).backgroundColor"))
    assert {"light", "dark"} <= set(seen)
    assert seen["light"] > 0.8 and seen["dark"] < 0.2


def test_search_finds_cuda_launch_kernel(base_url: str, context: Any) -> None:
    page = context.new_page()
    page.goto(base_url + "search.html?q=cudaLaunchKernel")
    results = page.locator("#search-results ul.search li")
    # Sphinx adds the results one by one (5 ms apart) and then says the search finished.
    page.get_by_text("Search finished").wait_for(timeout=15_000)
    assert results.count() >= 1
    links = results.locator("a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert any("dispatch-chain" in link for link in links)


def test_every_example_page_and_the_home_page_say_where_the_outputs_come_from(
    site: Build, base_url: str, context: Any
) -> None:
    import torch

    expected = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU only"
    page = context.new_page()
    examples = [p for p in site_pages(site) if re.match(EXAMPLE_PAGE, p)]
    assert examples
    for path in [*examples, "index.html"]:
        page.goto(base_url + path)
        box = page.locator(".admonition.pu-provenance")
        assert box.count() == 1, path
        text = box.inner_text()
        assert expected in text and torch.__version__ in text, (path, text)
        cpu_only = "pu-cpu-only" in (box.get_attribute("class") or "")
        assert cpu_only == (not torch.cuda.is_available()), path
        if cpu_only:
            assert "ran on the CPU" in text


def test_the_old_address_of_a_moved_page_leads_to_its_new_one(
    site: Build, base_url: str, context: Any
) -> None:
    moved = runpy.run_path(str(site.docs / "conf.py"))["moved_pages"]
    assert moved["auto_examples/plot_02_cold_start"] == (
        "auto_examples/part1_matmul_add/plot_02_cold_start"
    )
    for old, new in moved.items():
        assert (site.html / f"{new}.html").is_file(), new
        page = (site.html / f"{old}.html").read_text()
        assert f'<link rel="canonical" href="{new.removeprefix("auto_examples/")}.html">' in page
    page = context.new_page()
    page.goto(base_url + "auto_examples/plot_07_kernel_variance.html#how-fast-is-that")
    page.wait_for_url("**/auto_examples/part1_matmul_add/plot_07_kernel_variance.html*")
    assert page.url.endswith("part1_matmul_add/plot_07_kernel_variance.html#how-fast-is-that")
    assert page.locator("h1").first.inner_text().startswith("Kernel variance")


def test_outputs_from_another_library_torch_or_gpu_are_made_again(tmp_path: Path) -> None:
    example = '"""\nTiny\n====\n\nA question?\n"""\n\nprint("ran")\n'
    first = build_site(tmp_path, {"plot_tiny.py": example}, warnings_are_errors=False)
    assert first.returncode == 0, first.log[-6000:]
    assert first.executed() == (1, 0)
    record_path = first.docs / "auto_examples" / "plot_tiny.run.json"
    record = json.loads(record_path.read_text())

    unchanged = build_site(tmp_path, warnings_are_errors=False)
    assert unchanged.returncode == 0, unchanged.log[-6000:]
    assert unchanged.executed() == (0, 1)  # nothing changed: the cached outputs are kept

    record["fingerprint"] = "made with another torch"
    record_path.write_text(json.dumps(record))
    rebuilt = build_site(tmp_path, warnings_are_errors=False)
    assert rebuilt.returncode == 0, rebuilt.log[-6000:]
    assert rebuilt.executed() == (1, 0)
    assert json.loads(record_path.read_text())["fingerprint"] != "made with another torch"


def test_an_example_that_raises_fails_the_build(tmp_path: Path) -> None:
    example = '"""\nBroken\n======\n\nA question?\n"""\n\nraise RuntimeError("no GPU here")\n'
    build = build_site(tmp_path, {"plot_broken.py": example}, warnings_are_errors=False)
    assert build.returncode != 0
    assert "RuntimeError: no GPU here" in build.log


def test_an_example_that_exits_the_interpreter_fails_the_build(tmp_path: Path) -> None:
    example = '"""\nExits\n=====\n\nA question?\n"""\n\nimport sys\n\nsys.exit(0)\n'
    build = build_site(tmp_path, {"plot_exits.py": example}, warnings_are_errors=False)
    assert build.returncode != 0
    assert "plot_exits.py:10" in build.log and "must not exit the interpreter" in build.log
    assert not (tmp_path / "html" / "index.html").exists()
