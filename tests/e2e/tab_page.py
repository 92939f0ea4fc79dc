"""Opening the Xray tab in a page: the plugin's iframe, waited for until the tab has drawn its run list."""

from __future__ import annotations

from playwright.sync_api import expect

IFRAME = 'iframe[src*="plugin_entry.html?name=xray"]'


def open_tab(page, url, hash_data: str = ""):
    page.goto(f"{url}/#xray{hash_data}")
    frame = page.frame_locator(IFRAME)
    expect(frame.locator("#xray-run")).to_be_attached(timeout=30_000)
    return frame


def plugin_frame(page):
    return next(f for f in page.frames if "plugin_entry.html" in f.url)
