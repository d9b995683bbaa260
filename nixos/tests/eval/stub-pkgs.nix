# A stand-in for nixpkgs' `pkgs`, just large enough to evaluate
# nixos/module.nix with the real nixpkgs lib and no store: packages are
# attrsets that look like derivations, and formats.toml renders TOML with a
# small emitter (real nixpkgs runs remarshal in a build instead).
{lib}: let
  fakeHash = seed: builtins.substring 0 32 (builtins.hashString "sha256" seed);
  mkPackage = name: {
    type = "derivation";
    inherit name;
    pname = name;
    version = "0.0.0-stub";
    outPath = "/nix/store/${fakeHash name}-${name}";
    meta.description = "stub ${name}";
  };
  mkTextFile = name: text: {
    type = "derivation";
    inherit name text;
    outPath = "/nix/store/${fakeHash text}-${name}";
  };

  # TOML: scalars and arrays first, then one [table] per nested attrset.
  tomlValue = v:
    if builtins.isAttrs v
    then "{ ${lib.concatStringsSep ", " (lib.mapAttrsToList (k: x: "${tomlKey k} = ${tomlValue x}") v)} }"
    else if builtins.isList v
    then "[${lib.concatMapStringsSep ", " tomlValue v}]"
    else if builtins.isBool v
    then lib.boolToString v
    else if builtins.isInt v || builtins.isFloat v
    then toString v
    else builtins.toJSON (toString v);
  tomlKey = k:
    if builtins.match "[A-Za-z0-9_-]+" k != null
    then k
    else builtins.toJSON k;
  tomlTable = path: attrs: let
    tables = lib.filterAttrs (_: builtins.isAttrs) attrs;
    plain = lib.filterAttrs (_: v: !(builtins.isAttrs v)) attrs;
    header = lib.optionalString (path != []) "[${lib.concatMapStringsSep "." tomlKey path}]\n";
    body = lib.concatStrings (lib.mapAttrsToList (k: v: "${tomlKey k} = ${tomlValue v}\n") plain);
  in
    header + body + lib.concatStrings (lib.mapAttrsToList (k: v: "\n" + tomlTable (path ++ [k]) v) tables);

  tomlValueType = with lib.types;
    (oneOf [bool int float str path (attrsOf tomlValueType) (listOf tomlValueType)])
    // {description = "TOML value";};
in {
  git = mkPackage "git";
  coreutils = mkPackage "coreutils";
  curl = mkPackage "curl";
  openssh = mkPackage "openssh";
  git-collab = mkPackage "git-collab";
  postgresql = mkPackage "postgresql";

  writeText = mkTextFile;
  # The real one adds a #! line for nixpkgs' bash and checks the syntax.
  writeShellScript = mkTextFile;

  formats.toml = _: {
    type = tomlValueType;
    generate = name: value: mkTextFile name (tomlTable [] value);
  };
}
