"""The canary's pages are read in Chromium here, beside the flow that drives them."""

from tests.support.browser import browser, open_as  # noqa: F401 (fixtures)
