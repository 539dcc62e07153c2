// The operator's time zone for the admin's times: the browser's IANA zone name goes into the
// askcards_tz cookie, which askcards.timezones.OperatorTimeZoneMiddleware activates for admin
// pages. When the cookie was missing or named another zone, the page reloads once so the times
// on it are already the operator's (never twice for one zone: a zone the server does not know
// stays on the server's zone, shown on the page).
(function () {
  "use strict";
  var NAME = "askcards_tz";
  var zone;
  try {
    zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  } catch (error) {
    return;
  }
  if (!zone || zone.length > 64 || !/^[A-Za-z0-9_+\-\/]+$/.test(zone)) {
    return;  // IANA names only, written as they are (a cookie value may hold "/")
  }
  function stored() {
    var match = document.cookie.match(/(?:^|;\s*)askcards_tz=([^;]*)/);
    return match ? match[1] : null;
  }
  if (stored() === zone) {
    return;
  }
  document.cookie = NAME + "=" + zone + "; path=/; max-age=31536000; SameSite=Lax" +
    (location.protocol === "https:" ? "; Secure" : "");
  var guard = NAME + ":" + zone;
  try {
    if (stored() !== zone || sessionStorage.getItem(guard)) {
      return;  // cookies refused, or already reloaded once for this zone
    }
    sessionStorage.setItem(guard, "1");
  } catch (error) {
    return;
  }
  location.reload();
})();
