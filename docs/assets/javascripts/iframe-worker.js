/* Search in the pages read from the file system (site/index.html opened in a browser).

   Material's search runs in a Web Worker, which a page read from file:// may not start. The
   offline plugin would load a shim for that from unpkg.com (iframe-worker): this file stands
   for it (mkdocs.yml lists it under extra.polyfills, which the plugin then leaves alone), so
   that nothing is fetched from the internet. For file:// pages only, `Worker` runs the worker's
   script in a hidden iframe of the page's own origin: its `addEventListener("message")` and
   `postMessage` are bridged to the page, asynchronously, as a worker's are. */
(function () {
  "use strict";
  if (location.protocol !== "file:") return;

  class IframeWorker extends EventTarget {
    constructor(url) {
      super();
      this.onmessage = null;
      this.onerror = null;
      this._handlers = [];
      this._queue = [];
      this._ready = false;
      this._frame = document.createElement("iframe");
      this._frame.hidden = true;
      this._frame.setAttribute("aria-hidden", "true");
      const start = () => this._start(new URL(url, location.href).href);
      if (document.body) start();
      else document.addEventListener("DOMContentLoaded", start, { once: true });
    }

    _start(url) {
      document.body.appendChild(this._frame);
      const scope = this._frame.contentWindow;
      scope.addEventListener = (type, handler) => {
        if (type === "message") this._handlers.push(handler);
      };
      scope.postMessage = (data) => {
        setTimeout(() => {
          const event = new MessageEvent("message", { data });
          if (typeof this.onmessage === "function") this.onmessage(event);
          this.dispatchEvent(event);
        });
      };
      scope.importScripts = () => {
        throw new Error("importScripts is not available to a worker read from file://");
      };
      const script = scope.document.createElement("script");
      script.src = url;
      script.onload = () => {
        this._ready = true;
        this._queue.splice(0).forEach((data) => this._deliver(data));
      };
      script.onerror = () => {
        const event = new ErrorEvent("error", { message: `cannot load ${url}` });
        if (typeof this.onerror === "function") this.onerror(event);
        this.dispatchEvent(event);
      };
      scope.document.head.appendChild(script);
    }

    _deliver(data) {
      setTimeout(() => this._handlers.forEach((handler) => handler({ data })));
    }

    postMessage(data) {
      if (this._ready) this._deliver(data);
      else this._queue.push(data);
    }

    terminate() {
      this._handlers = [];
      this._frame.remove();
    }
  }

  window.Worker = IframeWorker;
})();
