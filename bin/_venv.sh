# Sourced by bin/run and bin/test: make .venv and install the given requirements file when it
# changed since the last install (a stamp holds its checksum).
requirements="$1"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "console: creating .venv with $($python --version)" >&2
  "$python" -m venv .venv
fi
stamp=".venv/.installed-$(basename "$requirements")"
wanted="$(cat requirements.txt "$requirements" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "console: installing $requirements into .venv" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r "$requirements"
  echo "$wanted" > "$stamp"
fi
