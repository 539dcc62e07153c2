"""What people and probes open on askcards itself: sign-in, the live answer panel (its page in
``views``, its socket in ``consumers``), ``/healthz``, ``/metrics`` and the error pages. Entry
points, thin: they call selectors and services."""
