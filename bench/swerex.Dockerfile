# runner/base plus SWE-ReX's server, for the bench only (`make bench-peers`): built from what
# bench/.venv's pip put in bench/.swerex-site, with no network and no pull (FROM a local image).
FROM runner/base:latest
USER root
COPY .swerex-site /opt/swerex
ENV PYTHONPATH=/opt/swerex
RUN printf '#!/bin/sh\nexec python3 -m swerex.server "$@"\n' > /usr/local/bin/swerex-remote && chmod 755 /usr/local/bin/swerex-remote
USER 1000:1000
