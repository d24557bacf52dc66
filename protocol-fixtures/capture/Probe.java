import org.apache.kafka.clients.admin.*;
import java.util.*;
public class Probe {
  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    p.put("bootstrap.servers", a[0]);
    try (Admin admin = Admin.create(p)) {
      FeatureMetadata fm = admin.describeFeatures().featureMetadata().get();
      System.out.println("finalized=" + fm.finalizedFeatures() + " epoch=" + fm.finalizedFeaturesEpoch());
      if (a.length > 1) {
        short lvl = Short.parseShort(a[2]);
        FeatureUpdate.UpgradeType t = FeatureUpdate.UpgradeType.valueOf(a[3]);
        try {
          admin.updateFeatures(Map.of(a[1], new FeatureUpdate(lvl, t)), new UpdateFeaturesOptions()).all().get();
          System.out.println("update ok");
        } catch (Exception e) { System.out.println("update failed: " + e.getCause()); }
      }
    }
  }
}
