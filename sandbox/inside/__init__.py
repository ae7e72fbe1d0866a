"""The far side of the trust boundary: the code that runs inside every sandbox container.

These modules are copied into the image byte for byte, as the package `inside` under
/opt/airlock (editable_site.py goes to site-packages as `airlock_editable_site`), and run
there as the container's entrypoint (boot.py), its runner (runner.py), the process that
becomes the code (prestart.py), the editable-install path hook (editable_site.py) and the
build's manifest writer (inventory.py). So only the standard library of the image's Python
(3.11) may be used here, and this package itself (tests/rooms/inside/test_inside.py checks both).

The host imports one module of it, wire.py: the frame format and the container layout both
sides agree on. Everything else here is named by the host only as files to copy.
"""
