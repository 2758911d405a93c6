// "Open in Perfetto" for the trace widgets that profiling_utils.render.trace_links() writes.
//
// Perfetto's documented postMessage hand-off: open https://ui.perfetto.dev, send "PING" until
// the UI answers "PONG" (its listener is not ready at first and messages are not buffered),
// then post {perfetto: {buffer, title, fileName}}. The trace is fetched from this site and is
// handed over inside the browser; it is never uploaded anywhere.
(() => {
  "use strict";

  const PERFETTO_ORIGIN = "https://ui.perfetto.dev";
  const PING_INTERVAL_MS = 100;
  const HANDSHAKE_TIMEOUT_MS = 30000;

  function setStatus(widget, text, link) {
    const status = widget.querySelector(".pu-perfetto-status");
    if (!status) return;
    status.textContent = text;
    if (link) {
      status.append(" ");
      const anchor = document.createElement("a");
      anchor.href = link.href;
      anchor.textContent = link.text;
      status.append(anchor, ".");
    }
  }

  // Resolves once the opened window answers PONG; PING goes to "*" because until the UI has
  // loaded, the window is still about:blank and a PING addressed to Perfetto's origin would
  // be refused with an error in this page's console.
  function handshake(perfetto) {
    return new Promise((resolve, reject) => {
      const started = Date.now();
      const onMessage = (event) => {
        if (event.source !== perfetto || event.origin !== PERFETTO_ORIGIN) return;
        if (event.data !== "PONG") return;
        stop();
        resolve();
      };
      const timer = window.setInterval(() => {
        if (perfetto.closed) {
          stop();
          reject(new Error("the Perfetto window was closed"));
        } else if (Date.now() - started > HANDSHAKE_TIMEOUT_MS) {
          stop();
          reject(new Error("Perfetto did not answer"));
        } else {
          perfetto.postMessage("PING", "*");
        }
      }, PING_INTERVAL_MS);
      function stop() {
        window.clearInterval(timer);
        window.removeEventListener("message", onMessage);
      }
      window.addEventListener("message", onMessage);
    });
  }

  async function openInPerfetto(button) {
    const widget = button.closest(".pu-trace");
    const href = widget.dataset.traceHref;
    const download = { href: href, text: "download the trace" };
    // window.open must run in the click itself, before any await, or pop-up blockers stop it.
    const perfetto = window.open(PERFETTO_ORIGIN);
    if (!perfetto) {
      setStatus(
        widget,
        "Your browser blocked the Perfetto window. Allow pop-ups for this site and click " +
          "again, or open ui.perfetto.dev yourself and drop the file on it:",
        download,
      );
      return;
    }
    button.disabled = true;
    try {
      setStatus(widget, "Fetching the trace…");
      const response = await fetch(new URL(href, document.baseURI));
      if (!response.ok) throw new Error(`the trace answered HTTP ${response.status}`);
      const buffer = await response.arrayBuffer();
      setStatus(widget, "Waiting for Perfetto to load…");
      await handshake(perfetto);
      perfetto.postMessage(
        {
          perfetto: {
            buffer: buffer,
            title: widget.dataset.traceTitle,
            fileName: widget.dataset.traceFile,
          },
        },
        PERFETTO_ORIGIN,
      );
      setStatus(widget, "Opened in Perfetto, in the other tab.");
    } catch (error) {
      setStatus(widget, `Could not open the trace in Perfetto (${error.message}). You can`, download);
    } finally {
      button.disabled = false;
    }
  }

  function enable() {
    for (const button of document.querySelectorAll(".pu-trace .pu-perfetto-open")) {
      button.hidden = false;
      button.addEventListener("click", () => openInPerfetto(button));
      setStatus(button.closest(".pu-trace"), "");
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", enable);
  } else {
    enable();
  }
})();
