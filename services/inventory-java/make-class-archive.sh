#!/bin/sh
# make-class-archive.sh JAR DESTINATION: lay the Spring Boot jar out for class-data sharing.
#
# Spring Boot's `extract` writes DESTINATION/inventory-java.jar with its libraries beside it in
# lib/, a layout the JVM can map classes from. One training start then records every class a
# start loads into DESTINATION/inventory-java.jsa (-XX:ArchiveClassesAtExit): later starts given
# -XX:SharedArchiveFile map them instead of reading, verifying and linking each again, which
# roughly halves a start's CPU. The training start exits once its context is refreshed, before
# anything is started (spring.context.exit=onRefresh): it connects to nothing; its settings only
# have to pass validation. An archive is an optimization: when the training fails, the layout is
# kept without one and the consumer starts as before.
set -eu
jar=$1
destination=$2
rm -rf "$destination"
java -Djarmode=tools -jar "$jar" extract --destination "$destination"
if ! env -i PATH="$PATH" \
    DATABASE_URL=postgresql://training:training@127.0.0.1:9/training \
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9 CONTROL_PORT=9 \
    java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -XX:ArchiveClassesAtExit="$destination/inventory-java.jsa" -Dspring.context.exit=onRefresh \
    -jar "$destination/inventory-java.jar" >"$destination/training.log" 2>&1; then
  rm -f "$destination/inventory-java.jsa"
  echo "inventory-java: no class archive (the training start failed; see $destination/training.log)" >&2
fi
