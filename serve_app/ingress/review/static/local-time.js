// Shows each <time datetime> of the page in the viewer's own time zone and language; the server writes UTC.
"use strict";
const LOCAL_TIME = {
  year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZoneName: "short",
};
for (const element of document.querySelectorAll("time[datetime]")) {
  const moment = new Date(element.dateTime);
  if (!Number.isNaN(moment.getTime())) {
    element.title = element.textContent;
    element.textContent = moment.toLocaleString(undefined, LOCAL_TIME);
  }
}
