// lfmserve's page registers no service worker: its files are small and revalidated (ETag), and no API answer
// may ever come from a cache. This file is for browsers that installed llama-server's web UI from this same
// address: they fetch /sw.js to update that worker, and this one takes its place, deletes its caches (the old
// UI's files; this worker caches nothing and handles no fetch) and unregisters itself, so every page comes from
// the server again. llama-server answers /sw.js with the same worker when its own UI is off.
self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => {
  event.waitUntil(
    (async () => {
      await self.registration.unregister();
      for (const key of await caches.keys()) await caches.delete(key);
      for (const client of await self.clients.matchAll({ type: "window" })) client.navigate(client.url);
    })(),
  );
});
